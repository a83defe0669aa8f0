"""The store's SQLite schema, its version, and the migrations from every earlier version.

A store made by an earlier slurm-elastic is migrated in place when the daemon opens it
(:class:`~slurm_elastic.store.Store`); a version this code does not know is refused.
"""

from __future__ import annotations

SCHEMA_VERSION = 10
LOCK_WAIT_S = 2.0
"""How long a call waits for another process's write lock before it fails (sqlite's busy timeout)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
    id INTEGER PRIMARY KEY,
    t REAL NOT NULL,
    policy TEXT NOT NULL,
    summary TEXT NOT NULL,
    plan TEXT NOT NULL,
    violations TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY,
    round_id INTEGER REFERENCES rounds(id),
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    message TEXT NOT NULL DEFAULT '',
    started REAL NOT NULL,
    finished REAL
);
CREATE INDEX IF NOT EXISTS actions_state ON actions(state);
CREATE INDEX IF NOT EXISTS actions_job ON actions(job_id);
CREATE TABLE IF NOT EXISTS progress (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    t REAL NOT NULL,
    samples INTEGER NOT NULL,
    world INTEGER NOT NULL,
    global_batch INTEGER NOT NULL,
    throughput REAL,
    loss REAL,
    metric REAL,
    kind TEXT NOT NULL DEFAULT 'progress',
    pause_s REAL,
    epoch_size INTEGER,
    lost TEXT NOT NULL DEFAULT '',
    nodes INTEGER,
    model TEXT,
    params INTEGER,
    epochs REAL,
    submitted_epochs INTEGER,
    submitted_local_batch INTEGER
);
CREATE INDEX IF NOT EXISTS progress_job ON progress(job_id, t);
CREATE INDEX IF NOT EXISTS progress_end ON progress(kind, job_id, t);
CREATE TABLE IF NOT EXISTS report_offsets (job_id TEXT PRIMARY KEY, offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS workers (
    job_id TEXT NOT NULL,
    worker TEXT NOT NULL,
    node TEXT NOT NULL,
    alloc TEXT NOT NULL,
    PRIMARY KEY (job_id, worker)
);
CREATE TABLE IF NOT EXISTS worker_runs (job_id TEXT PRIMARY KEY, run INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS releases (
    job_id TEXT PRIMARY KEY,
    nodes TEXT NOT NULL,
    world INTEGER NOT NULL,
    leaving INTEGER NOT NULL,
    ordered REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS satellites (
    sat_id TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    submitted REAL NOT NULL,
    ended REAL
);
CREATE TABLE IF NOT EXISTS steps (
    action_id INTEGER NOT NULL REFERENCES actions(id),
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    detail TEXT NOT NULL,
    t REAL NOT NULL,
    PRIMARY KEY (action_id, seq)
);
CREATE TABLE IF NOT EXISTS quarantine (
    job_id TEXT PRIMARY KEY,
    t REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS submit_times (
    job_id TEXT PRIMARY KEY,
    t REAL NOT NULL
);
"""

# Version 1 stores lack the report kind and resize pause of progress rows.
_MIGRATE_1_TO_2 = (
    "ALTER TABLE progress ADD COLUMN kind TEXT NOT NULL DEFAULT 'progress'",
    "ALTER TABLE progress ADD COLUMN pause_s REAL",
    "ALTER TABLE progress ADD COLUMN epoch_size INTEGER",
)
# Version 2 stores named a report's world size ``gpus``; the launcher, the reports and the rows say ``world``.
_MIGRATE_2_TO_3 = ("ALTER TABLE progress RENAME COLUMN gpus TO world",)
# Version 3 stores lack the steps table, version 4 the submit times (both created by the schema
# script): nothing to alter.
# Version 5 stores lack the lost workers of a recovery's report.
_MIGRATE_5_TO_6 = ("ALTER TABLE progress ADD COLUMN lost TEXT NOT NULL DEFAULT ''",)
# Version 6 stores lack the node count a report's world ran on.
_MIGRATE_6_TO_7 = ("ALTER TABLE progress ADD COLUMN nodes INTEGER",)
# Version 7 stores lack the job identity a report names (its model's name and parameter count).
_MIGRATE_7_TO_8 = ("ALTER TABLE progress ADD COLUMN model TEXT", "ALTER TABLE progress ADD COLUMN params INTEGER")
# Version 8 stores lack the run each job's worker layout belongs to (the schema script creates the
# table; a layout without a run is the first run's).
# Version 9 stores lack what a report says the job runs (its epochs) and what the submit flags said
# where the script runs otherwise.
_MIGRATE_9_TO_10 = ("ALTER TABLE progress ADD COLUMN epochs REAL", "ALTER TABLE progress ADD COLUMN submitted_epochs "
                    "INTEGER", "ALTER TABLE progress ADD COLUMN submitted_local_batch INTEGER")
_FROM_5 = _MIGRATE_5_TO_6 + _MIGRATE_6_TO_7 + _MIGRATE_7_TO_8 + _MIGRATE_9_TO_10
MIGRATIONS = {1: _MIGRATE_1_TO_2 + _MIGRATE_2_TO_3 + _FROM_5, 2: _MIGRATE_2_TO_3 + _FROM_5, 3: _FROM_5, 4: _FROM_5,
               5: _FROM_5, 6: _MIGRATE_6_TO_7 + _MIGRATE_7_TO_8 + _MIGRATE_9_TO_10,
               7: _MIGRATE_7_TO_8 + _MIGRATE_9_TO_10, 8: _MIGRATE_9_TO_10, 9: _MIGRATE_9_TO_10}
