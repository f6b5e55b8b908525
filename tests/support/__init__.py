"""Code the tests share, imported as `tests.support.<module>` (the repository root is on pytest's
pythonpath): runs and their events, stand-in models and servers, the app driven from outside. No
test module imports another, so each module is loaded once, under one name."""
