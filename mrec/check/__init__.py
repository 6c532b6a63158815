"""Layer 4: checking records. The validator (validate.py), repair of a crashed record (repair.py) and
the golden fixture catalogue other implementations prove themselves against (the fixtures/ package)."""
