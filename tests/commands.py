"""How the service is set up and served: the same commands in the Makefile, compose file and e2e tests."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP_COMMAND = ["flask", "--app", "service", "setup"]
SERVE_COMMAND = ["gunicorn", "-c", "gunicorn.conf.py"]
