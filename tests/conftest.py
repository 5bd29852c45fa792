"""Shared by every test: this folder on sys.path, so that the helpers beside this file (paths,
cli_run, plan_text, shell_check) import from the test folders below it."""
