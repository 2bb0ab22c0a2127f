"""The cluster spec: read strictly, validated into frozen models, rendered as a reference page.
It only reads and checks: it never opens a socket, starts a process or touches the environment."""
