"""What a call and its result mean: records, fingerprints, outcomes, kinds and the value codec."""
