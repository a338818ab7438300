// Runs a benchmark handler over the inputs of a JSON file and prints one line per input (the
// answer, or the error's name and message), then the objects and sessions written.
// Usage: node drive.mjs HANDLER_FILE INPUTS_FILE
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { readFileSync } from "node:fs";

const [relativeFile, inputsFile] = process.argv.slice(2);
const handlerFile = resolve(relativeFile);
const store = (globalThis.__kilnTestStore ??= new Map());
const users = [];
for (let i = 0; i < 50; i++) users.push({ username: `user${i}`, password: `store-secret-${i * 7}` });
store.set("users/users.json", { body: JSON.stringify(users) });
store.set("commits/kiln/abcdef1.json", { body: JSON.stringify({ message: "fix", author: { login: "store-secret-login" } }) });
store.set("commits/kiln/1234567.json", { body: JSON.stringify({}) });

const sessions = new Map();
function context(i) {
  return {
    awsRequestId: `req-${i}`,
    session: {
      async transact(fn) {
        const txn = {
          async get(key) { await null; return sessions.get(key); },
          async put(key, value) { await null; sessions.set(key, value); },
        };
        return fn(txn);
      },
    },
  };
}

const url = pathToFileURL(handlerFile).href;
const module = handlerFile.endsWith(".mjs") || readFileSync(handlerFile, "utf8").includes("export ")
  ? await import(url)
  : createRequire(import.meta.url)(handlerFile);
const handler = module.handler ?? module.default?.handler;
const inputs = JSON.parse(readFileSync(inputsFile, "utf8"));
for (let i = 0; i < inputs.length; i++) {
  try {
    const answer = await handler(inputs[i], context(i));
    console.log(JSON.stringify(answer));
  } catch (error) {
    console.log(`error ${error.name}: ${error.message}`);
  }
}
console.log(JSON.stringify([...store.entries()].filter(([k]) => !k.startsWith("users/"))));
console.log(JSON.stringify([...sessions.entries()]));
