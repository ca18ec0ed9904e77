"""The shedder: lag in time from consumer offsets, accuracy-aware shedding requests (to come)."""
