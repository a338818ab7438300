// Start-path semantics of tests/startpaths/test_start_paths.py for runtimes that cannot fork: a standby instance ran
// init and the warm-up invocations before it served its first real invocation.
const fs = require("fs");
const path = require("path");

const VERSION = fs.readFileSync(path.join(__dirname, "version.txt"), "utf8").trim();
const EVENTS = [];

exports.handler = async (event) => {
  EVENTS.push(event);
  if (event.action === "inspect") {
    return { env: { ...process.env }, cwd: process.cwd(), files: fs.readdirSync(".").sort(), version: VERSION };
  }
  if (event.action === "sleep") {
    await new Promise((resolve) => setTimeout(resolve, event.seconds * 1000));
  }
  return { version: VERSION, events: EVENTS, pid: process.pid };
};
