"""The storage contract and its backends (memory, SQLite, etcd), with encryption at rest."""
