// A comments app on Express 5 and node-postgres, configured only through its environment
// (DATABASE_URL, or PGHOST/PGPORT/PGUSER/PGPASSWORD/PGDATABASE as pg reads them). server.js runs it
// on its own (the monolith); kiln serves the same code as a web function (--web-app app.js#app).
const express = require('express');
const { Pool } = require('pg');

const pool = new Pool({
  connectionString: process.env.DATABASE_URL || undefined,
  max: Number(process.env.PG_POOL_MAX || 4),
});

const app = express();
app.use(express.json());
app.use(express.urlencoded({ extended: false }));

// A few words a comment may not carry: the route's own work besides its INSERT.
const BANNED = ['casino', 'free money', 'click here'];
function moderate(text) {
  const words = text.toLowerCase().normalize('NFKC').split(/\s+/).filter(Boolean);
  const flagged = BANNED.some((b) => words.join(' ').includes(b));
  return { flagged, words: words.length };
}

app.get('/', (req, res) => {
  res.json({ app: 'comments', pid: process.pid });
});

app.post('/comment/', async (req, res, next) => {
  try {
    const { post, author, body } = req.body || {};
    const requestId = (req.body && req.body.request_id) || req.get('x-request-id');
    if (!requestId || !post || !body) {
      return res.status(400).json({ error: 'post, body and request_id (or X-Request-Id) are required' });
    }
    const { flagged, words } = moderate(String(body));
    if (flagged) return res.status(422).json({ error: 'comment refused by moderation' });
    const { rows } = await pool.query(
      'INSERT INTO comments (request_id, post, author, body, words) VALUES ($1, $2, $3, $4, $5) RETURNING *',
      [String(requestId), Number(post), String(author || 'anonymous'), String(body), words],
    );
    res.status(201).json(rows[0]);
  } catch (err) {
    next(err);
  }
});

app.get('/comments/:post', async (req, res, next) => {
  try {
    // A named prepared statement: pg parses it once per connection, then only binds it.
    const { rows } = await pool.query({
      name: 'comments-by-post',
      text: 'SELECT id, request_id, post, author, body, words, created_at FROM comments WHERE post = $1 ORDER BY id',
      values: [Number(req.params.post)],
    });
    res.json({ post: Number(req.params.post), comments: rows });
  } catch (err) {
    next(err);
  }
});

module.exports = { app, pool };
