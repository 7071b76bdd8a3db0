"""The schema's migration files, shipped inside the wheel as `orderflow_pg.migrations`.

This folder sits at the top of the checkout so the schema is easy to find; pyproject.toml maps it
to the package name the runner (orderflow_pg/migrate.py) reads it from, editable or installed.
"""
