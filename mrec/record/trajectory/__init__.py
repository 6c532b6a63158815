"""The trajectory: the writer (writer.py, coordinating its stages plan -> buffer -> land -> commit, and
opening.py for create / reopen), the reader (reader.py), and truncate / repair / walk."""
