"""The person at this machine: desktop dialogs, and the one confirmation every change that needs them
goes through (``confirm_by_person``; a group send's question too). Imports nothing above base.
"""
