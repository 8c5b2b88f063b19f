"""Programs that run inside the replicas. They read only the operator's env and URIs."""
