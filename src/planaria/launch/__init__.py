"""planaria.launch"""
