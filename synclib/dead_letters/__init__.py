"""Dead letters (`sink.dead_letters`): rows the transform rejects or raises on go to a second Delta
table, so one poison event does not stop the forwarder.

Modules: `sink` (the `foreachBatch` sink writing both tables exactly once, and its start),
`transformed` (source rows through the transform: what the main table gets of them, the poison
and rejected rows; the sink's and a replay's), `isolation` (finding the poison rows of a batch,
no Spark), `source_rows` (a micro-batch's source rows read again by its offsets), `table` (what
the dead-letter table holds, no Spark, for the status command), `replay` (listing and replaying
dead letters) and `commands` (`synclib dead-letters list|replay`).
"""
