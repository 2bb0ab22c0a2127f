"""Ways of reaching hosts, behind one interface (see base.py and fleet.py). Kept empty: the CLI
imports `local` before the rest of the launcher (local.start_early)."""
