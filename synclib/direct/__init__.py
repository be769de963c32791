"""The direct write path (delta-rs, no transform): the source whose read tasks write the Delta
table's Parquet files (`source`), over the source (`synclib.source`) and the sink's file writer
(`synclib.delta.direct`), which as siblings do not import each other."""
