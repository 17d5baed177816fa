"""Judged values formatted for people: the stage and summary views, charts, text safety,
GitHub outputs, and their rendering through the templates."""
