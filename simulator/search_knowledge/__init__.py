"""The ``search_knowledge`` tool of seed 003: its states, ranking, behaviour and routes."""
