"""Root conftest: the project's own tests drive pytest sessions with ``pytester``."""

pytest_plugins = ["pytester"]
