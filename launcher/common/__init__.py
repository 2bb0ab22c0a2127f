"""What every stage of the launcher uses: its errors and exit codes, masking secrets and screen text,
owner-only files, reading a task's log. Imports nothing of the launcher's above it."""
