// The app on its own: WORKERS processes (node's cluster module) sharing PORT.
const cluster = require('cluster');

const port = Number(process.env.PORT || 3000);
const workers = Number(process.env.WORKERS || 2);

if (cluster.isPrimary) {
  for (let i = 0; i < workers; i++) cluster.fork();
  let ready = 0;
  cluster.on('listening', () => {
    ready += 1;
    if (ready === workers) console.log(`listening on ${port} with ${workers} workers`);
  });
  cluster.on('exit', (worker, code, signal) => {
    console.error(`worker ${worker.process.pid} exited (${signal || code})`);
  });
  const stop = () => {
    for (const w of Object.values(cluster.workers)) w.process.kill('SIGTERM');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  const { app } = require('./app');
  app.listen(port, '127.0.0.1');
}
