-- Counters of earlier tool calls, which per-call policy rules read ("at most 20 writes an
-- hour"): one row per counter and minute (minutes since the Unix epoch), added to with an
-- upsert so that hosts sharing the store count together. A session's own counters are kept at
-- minute 0, for the whole session, and go with it; other rows go once they are older than
-- the longest window a rule may have (30 days).
CREATE TABLE call_counts (
    counter TEXT    NOT NULL,
    minute  INTEGER NOT NULL,
    calls   INTEGER NOT NULL,
    PRIMARY KEY (counter, minute)
);
-- Pruning by age.
CREATE INDEX call_counts_minute ON call_counts (minute);
