"""The checks of tests/python/validate_deploy.py, one module per kind of file."""
