"""stagegate: record each verification stage, judge it by a written policy, render reports."""
