/* placeholder replaced by the unit tests */
int main(void) { return 0; }
