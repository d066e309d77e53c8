"""Test helpers in this folder (``_fresh_process``) are importable from every test.

Pytest puts the folder of each ``conftest.py`` on ``sys.path`` (the default
"prepend" import mode), also when only a sub-folder's tests are collected.
"""
