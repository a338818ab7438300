// Runs s3_checks.mjs against a kiln from outside. Configured by the environment:
//   S3_ENDPOINT   the object store, e.g. http://127.0.0.1:9001 or http://localhost:9001
//   S3_BUCKET     a bucket name (created if missing)
//   S3_VIRTUAL=1  resolve *.localhost to 127.0.0.1 and let the SDK pick virtual-host style,
//                 as it does by default for a host name
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION  as usual
// Prints {"passed": [...], "failed": [...]} and exits 1 if anything failed.

import dns from "node:dns";
import http from "node:http";
import { S3Client } from "@aws-sdk/client-s3";
import { runChecks } from "./s3_checks.mjs";

const virtual = process.env.S3_VIRTUAL === "1";

// RFC 6761: *.localhost is loopback. Browsers and systemd resolve it; glibc alone does not.
function lookup(hostname, options, callback) {
  if (hostname === "localhost" || hostname.endsWith(".localhost")) {
    if (options.all) callback(null, [{ address: "127.0.0.1", family: 4 }]);
    else callback(null, "127.0.0.1", 4);
    return;
  }
  dns.lookup(hostname, options, callback);
}

const client = new S3Client({
  endpoint: process.env.S3_ENDPOINT,
  requestHandler: { httpAgent: new http.Agent({ keepAlive: true, lookup }) },
  maxAttempts: 1,
});

const result = await runChecks(client, {
  bucket: process.env.S3_BUCKET,
  // fetch() resolves names itself; BUCKET.localhost is not resolvable there.
  presign: !virtual,
  expectVirtualHost: virtual,
  versions: true,
});
console.log(JSON.stringify(result));
process.exit(result.failed.length === 0 ? 0 : 1);
