// A stand-in for @aws-sdk/client-s3 over an in-memory store, for running the benchmark
// handlers in tests: the store is a Map on the global, shared by every copy of this module.
"use strict";
const crypto = require("node:crypto");

const store = (globalThis.__kilnTestStore ??= new Map());

class Command {
  constructor(input) {
    this.input = input;
  }
}
class GetObjectCommand extends Command {}
class PutObjectCommand extends Command {}

class S3Client {
  constructor(config) {
    this.config = config;
  }
  async send(command) {
    await null;
    const { Bucket, Key } = command.input;
    const path = `${Bucket}/${Key}`;
    if (command instanceof GetObjectCommand) {
      if (!store.has(path)) {
        const error = new Error("The specified key does not exist.");
        error.name = "NoSuchKey";
        throw error;
      }
      const text = store.get(path).body;
      return { Body: { transformToString: async () => text } };
    }
    if (command instanceof PutObjectCommand) {
      const body = String(command.input.Body);
      store.set(path, { body, type: command.input.ContentType });
      const etag = `"${crypto.createHash("md5").update(body).digest("hex")}"`;
      return { ETag: etag };
    }
    throw new Error("unsupported command");
  }
}

exports.S3Client = S3Client;
exports.GetObjectCommand = GetObjectCommand;
exports.PutObjectCommand = PutObjectCommand;
