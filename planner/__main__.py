"""`python -m planner` runs the same CLI as the `planner` console script."""

from planner.cli.app import main

main()
