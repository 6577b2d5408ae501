"""Files on disk that every job system keeps (the bulk job's parts, the Batch API's files and
records): written whole or not at all (`atomic_files`)."""
