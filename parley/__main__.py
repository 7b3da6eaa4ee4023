from parley.cli import run

run()
