"""DVC stage bodies, one module per stage; ``stages/*.py`` parse arguments and call ``run``."""
