"""The `launch` command: argument parsing, what a person asked for turned into a spec, and one
function per subcommand. The only place that prints a command's result and exits."""
