"""xds_client."""
