-- The log of each deploy: `[build]` lines, the build's own output and the rollout's outcome, appended by the
-- operator through the API's internal routes and kept after build pods are gone. Read in byte windows.

CREATE TABLE deploy_logs (
    deploy_id uuid PRIMARY KEY,
    content bytea NOT NULL DEFAULT '\x'::bytea,
    updated_at timestamptz NOT NULL DEFAULT now()
);
