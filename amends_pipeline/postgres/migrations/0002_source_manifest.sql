-- Source and output binding of a namespace (written by `amends provision`).
--
-- The development broker has no topic IDs, so a namespace binds its source by
-- a marker message it wrote into every source partition: a random nonce at a
-- recorded offset. A recreated topic, or another topic under the same name,
-- cannot show the same nonce at the same offset and is refused.
CREATE TABLE source_manifest (
    ns_id               integer PRIMARY KEY REFERENCES namespaces ON DELETE CASCADE,
    source_topic        text    NOT NULL,
    output_topic        text    NOT NULL,
    partitions          integer NOT NULL CHECK (partitions BETWEEN 1 AND 65536),
    source_incarnation  text    NOT NULL,
    config_digest       text    NOT NULL,
    nonce               text    NOT NULL,
    marker_namespace    text    NOT NULL,  -- the namespace that wrote the markers (a rebuild shares its source's)
    created_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE source_markers (
    ns_id          integer NOT NULL REFERENCES source_manifest ON DELETE CASCADE,
    partition      integer NOT NULL CHECK (partition >= 0),
    marker_offset  bigint  NOT NULL CHECK (marker_offset >= 0),
    PRIMARY KEY (ns_id, partition)
);
