const missing = require('a-module-that-does-not-exist');
exports.handler = async () => missing;
