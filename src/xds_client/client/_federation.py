"""Transitional: the authority router's old module name (``client/_session.py`` still
imports it; ``_session.py`` is being split on another branch). Remove this file once
``_session.py`` imports :mod:`._authorities`."""

from ._authorities import AuthorityRouter

__all__ = ["AuthorityRouter"]
