"""Build-time tools of the project (run as ``python -m tools.<name>``); never imported by a deploy."""
