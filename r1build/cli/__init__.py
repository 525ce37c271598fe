"""The command line: argument parsing, rendering events and tables, exit codes. The only place that prints."""
