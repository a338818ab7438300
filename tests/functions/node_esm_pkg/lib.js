export const helper = (n) => n * 2;
