"""The trajectory: the writer (writer.py, coordinating its stages plan -> buffer -> land -> commit, and
opening.py for create / reopen), the reader (reader.py, its row reads in reads.py), the
committed layout both read (layout.py), the store a record is read through (store.py), and truncate / repair / walk."""
