"""Fixtures shared by every test; the database ones live in dbfixtures.py (see its docstring)."""

from dbfixtures import warehouse, warehouse_url

__all__ = ["warehouse", "warehouse_url"]
