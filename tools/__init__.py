"""Repository tooling, neither product nor tests: used from the repository root, not in the wheel.

``import_contracts`` holds our import-linter contract type; ``lint-imports``
imports it from here (it puts the working directory on ``sys.path``).
"""
