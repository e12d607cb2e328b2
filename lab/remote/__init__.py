"""Fabric tasks that drive a target host (`fab -H nuc16 measure`)."""
