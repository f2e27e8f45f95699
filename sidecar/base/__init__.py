"""Foundations every concept uses: errors, the state folder's paths, config, the database, ids, defang,
process facts, NDJSON framing and supervised tasks. Imports nothing else of the sidecar.
"""
