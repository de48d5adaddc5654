-- Questions a host without a web API of its own (`cordon mcp` on stdio) waits to have
-- answered: by `cordon serve`'s approvals API or console, or by `cordon approve`. One row per
-- question; the answer is written once, by whoever answers first.
CREATE TABLE approvals (
    id          TEXT    PRIMARY KEY,
    asked_by    TEXT    NOT NULL,
    client      TEXT    NOT NULL,
    request     TEXT    NOT NULL,
    asked_ms    BIGINT  NOT NULL,
    expires_ms  BIGINT  NOT NULL,
    answer      TEXT,
    answered_ms BIGINT
);
CREATE INDEX approvals_waiting ON approvals (expires_ms) WHERE answer IS NULL;
