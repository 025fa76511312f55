"""Seeing inside clusters: the machine logs herder keeps, support bundles, and the metrics an on-call
person is paged on."""
