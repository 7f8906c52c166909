"""Shared test code (imported as ``helpers.<module>``; pytest puts tests/ on sys.path).

Test files import from here, never from each other.
"""
