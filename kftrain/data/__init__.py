"""The prepared-dataset format (Parquet shards per split plus ``dataset.json``) and its reader."""
