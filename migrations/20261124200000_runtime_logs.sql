-- Runtime logs of `app` and `docker` containers. Kubernetes keeps a container's output only while its pod exists
-- (and only the current and previous instance), so the operator follows every app container's output and appends
-- it here through the API's internal routes; the runtime-log route reads it back after a redeploy, a crash or a
-- pod deletion replaced the container.
--
-- One row per container generation: each instance of a channel's app container (a restart in the same pod is a
-- new generation, so is the container of a new deploy's pod), numbered per channel in the order they were first
-- seen. The facts are the container's state as the pod last reported it.

CREATE TABLE runtime_containers (
    id bigserial PRIMARY KEY,
    app_id uuid NOT NULL,
    channel_id uuid NOT NULL,
    container_index integer NOT NULL,
    -- The runtime's id of this instance (without the `containerd://` scheme): what identifies a generation.
    container_id text NOT NULL UNIQUE,
    pod_name text NOT NULL,
    deploy_id uuid,
    running boolean NOT NULL,
    status text NOT NULL,
    exit_code integer,
    oom_killed boolean NOT NULL DEFAULT false,
    restart_count integer NOT NULL DEFAULT 0,
    started_at timestamptz,
    finished_at timestamptz,
    -- Bytes of output kept (what trimming left).
    log_bytes bigint NOT NULL DEFAULT 0,
    -- The RFC 3339 timestamp of the last line kept: a follower that reconnects skips what it already sent.
    last_timestamp text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (channel_id, container_index)
);
CREATE INDEX runtime_containers_app ON runtime_containers (app_id);

-- The output itself, in the chunks it was appended in (each a run of whole lines).
CREATE TABLE runtime_log_chunks (
    container bigint NOT NULL REFERENCES runtime_containers (id) ON DELETE CASCADE,
    seq bigserial,
    content bytea NOT NULL,
    PRIMARY KEY (container, seq)
);
