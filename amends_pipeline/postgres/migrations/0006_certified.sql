-- Certified results: what an accepted verification vouched for.
--
-- `amends` writes these only after the verification at a complete boundary was
-- accepted (PASS, or PASS_WITH_EXCLUSIONS with its exclusions expected). Each
-- certification replaces the namespace's previous rows in one transaction, so
-- a reader sees either the old certified state or the new one, never a mix;
-- certified_boundaries keeps the history of what was certified when.
CREATE TABLE certified_boundaries (
    ns_id         integer     NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    certified_id  bigint      GENERATED ALWAYS AS IDENTITY,
    boundary      text        NOT NULL,  -- per partition "p:source_end:output_end"
    status        text        NOT NULL,
    keys          integer     NOT NULL,
    balances      integer     NOT NULL,
    alerts        integer     NOT NULL,
    certified_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns_id, certified_id)
);

CREATE TABLE certified_balances (
    ns_id     integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    item      text    NOT NULL,
    location  text    NOT NULL,
    day       date    NOT NULL,
    close     bigint  NOT NULL,
    PRIMARY KEY (ns_id, item, location, day)
);

CREATE TABLE certified_alerts (
    ns_id      integer NOT NULL REFERENCES namespaces ON DELETE CASCADE,
    item       text    NOT NULL,
    location   text    NOT NULL,
    day        date    NOT NULL,
    threshold  bigint  NOT NULL,
    close      bigint  NOT NULL,
    PRIMARY KEY (ns_id, item, location, day)
);
