// NoOp: the smallest function that still answers with JSON. The kiln function and the Node floor
// (bench/floors/node_http.js) both load this very file.
exports.handler = async (event, context) => ({});
