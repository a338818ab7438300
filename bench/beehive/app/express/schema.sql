-- The comments app's table, and a few posts' comments to start from.
CREATE TABLE IF NOT EXISTS comments (
    id         bigserial PRIMARY KEY,
    request_id text NOT NULL,
    post       integer NOT NULL,
    author     text NOT NULL,
    body       text NOT NULL,
    words      integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS comments_post ON comments (post, id);

INSERT INTO comments (request_id, post, author, body, words)
SELECT 'seed-' || g, g % 10, 'seed', 'A first comment on post ' || (g % 10), 6
FROM generate_series(1, 50) AS g
WHERE NOT EXISTS (SELECT 1 FROM comments WHERE request_id LIKE 'seed-%');
