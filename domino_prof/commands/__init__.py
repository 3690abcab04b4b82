"""One module per CLI command family; each exposes ``register(app)``.

Keeping commands in separate modules lets ``cli.py`` stay a thin index and keeps
heavy imports (pandas, plotly, torch) out of ``domino-prof --help``.
"""
