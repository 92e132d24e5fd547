"""planaria.runtime"""
