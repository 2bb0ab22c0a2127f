"""The far half of the host protocol: what runs on a host on the launcher's behalf (stdlib only)."""
