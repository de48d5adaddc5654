-- Where each `cordon serve` on the store can be reached by the others, by its name in leases:
-- a request that only the host driving a session can answer (the results of a gateway
-- client's own tools, which its turn waits for) is passed on to it.
CREATE TABLE serve_hosts (
    holder      TEXT    PRIMARY KEY,
    url         TEXT    NOT NULL,
    seen_ms     BIGINT  NOT NULL
);
